"""Schemathesis hooks for the contract tests (tests/tests/contract.rs)."""

import uuid

import schemathesis

IDEMPOTENCY_KEY = "Idempotency-Key"


@schemathesis.hook
def before_call(context, case, kwargs):
    """Gives each request that carries a well-formed Idempotency-Key a key of its own.

    The generator draws keys from a small space ("0", "00", ...), so two different requests
    often carry the same key, which the API rightly answers 422 `idempotency_key_reused`
    (docs/openapi.json). A key the document refuses (too long) is left as drawn, and so is every
    request of a negative case: what it tests (a header left out, say) stays as it was drawn.
    """
    if case.meta is not None and case.meta.generation.mode.is_negative:
        return
    headers = case.headers or {}
    key = headers.get(IDEMPOTENCY_KEY)
    if isinstance(key, str) and 0 < len(key) <= 255:
        headers[IDEMPOTENCY_KEY] = uuid.uuid4().hex
        case.headers = headers
