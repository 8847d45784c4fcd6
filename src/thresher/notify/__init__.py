"""Telling downstream systems: signed webhooks and their deliveries, used by the service
and the command line alike.

`sender.WebhookSender` records each webhook in the store once and delivers it on background
threads with retries (`sender.py`; one attempt within its deadline, to the address the
URL policy checked: `attempts.py`, `urls.py`; the threads shared fairly between tenants:
`delivery.py`, `shares.py`; when to try again: `retries.py`). What is sent is
`events.py`; how every message is signed (Standard Webhooks) and checked by a receiver,
`signing.py`; a tenant's OpenAI-style batch events are `endpoints.py`. `thresher run`
sends a job's webhooks through `notify_job_end` (`commands.py`); the service hooks the
sender on its job, tick and batch ends (`thresher.service.background.webhooks`). The
sender needs the service extra (`pip install 'thresher[service]'`); this face does not.

    >>> from thresher.notify import signed_headers, verify_signature
    >>> headers = signed_headers(["secret"], "msg_1", b"{}", at=1700000000)
    >>> verify_signature("secret", headers, b"{}", max_age=None)
    True
"""

from __future__ import annotations

from thresher.notify.commands import SECRET_VARIABLE, check_notify, notify_job_end
from thresher.notify.signing import signed_headers, standard_secret, verify_signature
from thresher.notify.urls import check_webhook_url

__all__ = [
    "SECRET_VARIABLE",
    "check_notify",
    "check_webhook_url",
    "notify_job_end",
    "signed_headers",
    "standard_secret",
    "verify_signature",
]
