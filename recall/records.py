"""Plain records for the start-up path: `dataclasses` costs ~5 ms to import, a third of what a
whole `recall search` adds to the interpreter's own start."""
from __future__ import annotations


class Record:
    """Arguments over the class's FIELDS (name → default; a list or dict default is copied per
    instance), positional ones in FIELDS order. Compares and prints by its fields."""

    FIELDS: dict = {}

    def __init__(self, *args, **values):
        if args:
            if len(args) > len(self.FIELDS):
                raise TypeError(f"{type(self).__name__} takes {len(self.FIELDS)} fields, not {len(args)}")
            named = dict(zip(self.FIELDS, args))
            twice = set(named) & set(values)
            if twice:
                raise TypeError(f"{type(self).__name__} got {', '.join(sorted(twice))} twice")
            values = {**named, **values}
        unknown = set(values) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        for name, default in self.FIELDS.items():
            value = values[name] if name in values else (
                type(default)(default) if isinstance(default, (list, dict)) else default)
            setattr(self, name, value)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.as_dict() == self.as_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"
