"""Lists the account's newest messages with the generated client, reading the worker and the
API key from the profile `bin/sim account create` wrote (`.dev.account.json`, or
EXACTLY_PROFILE; EXACTLY_API_KEY overrides the key):

    pip install /path/to/exactly/clients/python
    EXACTLY_PROFILE=/path/to/exactly/.dev.account.json python list_messages.py

Every documented answer comes back as its typed model: the page, or the API's error object
(`error.code`, `error.message`), which this prints with the status and exits 1.
"""

import json
import os
import sys

from exactly_client import AuthenticatedClient
from exactly_client.api.messages import list_messages
from exactly_client.models import ListMessagesResponse200


def main() -> int:
    with open(os.environ.get("EXACTLY_PROFILE", ".dev.account.json"), encoding="utf-8") as f:
        profile = json.load(f)
    token = os.environ.get("EXACTLY_API_KEY") or profile["api_key"]
    with AuthenticatedClient(base_url=profile["url"], token=token) as client:
        answer = list_messages.sync_detailed(client=client, limit=10)
    page = answer.parsed
    if not isinstance(page, ListMessagesResponse200):
        error = getattr(page, "error", None)
        if error is None:
            print(f"GET /v1/messages: {answer.status_code.value} (undocumented)", file=sys.stderr)
        else:
            print(f"GET /v1/messages: {answer.status_code.value} {error.code.value}: {error.message}", file=sys.stderr)
        return 1
    for message in page.data:
        print(f"{message.id} {message.direction.value} {message.status.value} {message.to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
