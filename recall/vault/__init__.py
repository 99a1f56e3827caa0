"""The vault: secrets files synced and sealed in place, the encrypted rows and their key, find / show /
command by metadata, the one runner of a child that holds values, and the masker every output passes."""

__all__ = ["audit", "door", "inplace", "keyfile", "mask", "redact", "removed", "reaper", "reveal", "runner",
           "secretfile", "store"]
