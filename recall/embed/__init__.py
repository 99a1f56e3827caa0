"""Embeddings: the providers (Voyage over urllib or its SDK, the local numpy BERT encoder), the token
ledger that caps what is billed, and the vector store."""

__all__ = ["ledger", "local_model", "providers", "query_encoder", "vectors"]
