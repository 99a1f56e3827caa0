"""Notes search: the files a source holds, chunked by heading, indexed into FTS5 and vectors, searched
by both lists fused, read back by section; kept fresh while watched."""

__all__ = ["chunk", "evaluate", "fusion", "index", "keyword", "query", "read", "search", "snippets", "terms", "walk",
           "watch"]
