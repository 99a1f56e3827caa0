"""Notes search: the files a source holds, chunked by heading, indexed into FTS5 and vectors, searched
by both lists fused, read back by section; kept fresh while watched."""
