"""Input and storage: WARC reading, Common Crawl snapshots, fsspec helpers.

Nothing here is imported by ``import dripper``; each module imports its optional dependency
(FastWARC, fsspec, s3fs) when first used and says which package to install when it is missing.
"""
