"""``kto console``: a small web console over the clusters' jobs and their audit log.

``summaries`` turns what was read (job objects, audit-log entries) into the
JSON documents the pages show — pure functions, the clock passed in;
``reading`` reads the clusters (every context of a kubeconfig) and the
``kto.jobs`` topic; ``serving`` is the aiohttp application: the two pages,
their JSON endpoints and server-sent event streams. The pages are plain HTML
(``pages/``, each filled into ``pages/layout.html``) with CSS and a little
vanilla JavaScript (``static/``): no front-end build step.
"""
