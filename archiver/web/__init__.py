"""`archiver console`: a web page for operators over the queue and the catalog -- what
runs, how far and how fast, what failed and why, the archive per table -- with the
CLI's actions behind an admin credential (archiver.web.auth). Starlette and Jinja2,
served by uvicorn; its templates and static files ship inside the package."""
