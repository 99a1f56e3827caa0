"""Embeddings: the providers (Voyage over urllib or its SDK, the local numpy BERT encoder), the token
ledger that caps what is billed, and the vector store."""
