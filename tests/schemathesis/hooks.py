"""Schemathesis hooks for the contract tests (tests/tests/contract.rs).

Each changes a request of a positive case (one the document allows) only, so that what a negative
case tests (a header left out, a value out of its pattern) stays as it was drawn; the one
exception, a webhook URL, says why.
"""

import datetime
import os
import re
import uuid

import schemathesis

IDEMPOTENCY_KEY = "Idempotency-Key"
PLAUSIBLE_URL = re.compile(r"^https?://[!-~]{1,2000}$")


@schemathesis.hook
def before_call(context, case, kwargs):
    deliver_to_the_local_receiver(case)
    if case.meta is not None and case.meta.generation.mode.is_negative:
        return
    fresh_idempotency_key(case)
    send_from_the_accounts_number(case)


def fresh_idempotency_key(case):
    """Gives each request that carries an Idempotency-Key a key of its own.

    The generator draws keys from a small space ("0", "00", ...), so two different requests
    often carry the same key, which the API rightly answers 422 `idempotency_key_reused`
    (docs/openapi.json).
    """
    headers = case.headers or {}
    key = headers.get(IDEMPOTENCY_KEY)
    if isinstance(key, str) and 0 < len(key) <= 255:
        headers[IDEMPOTENCY_KEY] = uuid.uuid4().hex
        case.headers = headers


def send_from_the_accounts_number(case):
    """Sends a message from the account's own number (`EXACTLY_NUMBER`), and a scheduled one an
    hour ahead.

    Any E.164 number fits the document's pattern, but only the account's own numbers send, and
    `send_at` must be within the next 7 days (422 naming the field otherwise): with these, the
    send itself is tested, and a scheduled message can be canceled.
    """
    number = os.environ.get("EXACTLY_NUMBER")
    if number is None or case.operation.label != "POST /v1/messages" or not isinstance(case.body, dict):
        return
    if isinstance(case.body.get("from"), str):
        case.body["from"] = number
    if isinstance(case.body.get("send_at"), str):
        ahead = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        case.body["send_at"] = ahead.strftime("%Y-%m-%dT%H:%M:%SZ")


def deliver_to_the_local_receiver(case):
    """Points an endpoint created or changed at the test's own receiver (`EXACTLY_RECEIVER`).

    A drawn URL names a host somewhere on the internet (`https://0.com`), which the test worker
    (allowed private endpoints, as every test worker is) would otherwise send signed webhooks to.
    This holds for negative cases too (one whose mistake is elsewhere may still be taken); a URL
    that is itself the mistake (not http(s), too long) is left as drawn.
    """
    receiver = os.environ.get("EXACTLY_RECEIVER")
    endpoint = case.operation.label in ("POST /v1/webhook_endpoints", "PATCH /v1/webhook_endpoints/{id}")
    if receiver is None or not endpoint or not isinstance(case.body, dict):
        return
    url = case.body.get("url")
    if isinstance(url, str) and PLAUSIBLE_URL.match(url):
        case.body["url"] = receiver

