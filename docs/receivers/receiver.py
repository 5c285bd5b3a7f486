"""A receiver of exactly's webhooks in Python, verified with the official Standard Webhooks
library. Run it with the endpoint's secret (shown once, when the endpoint is created):

    pip install standardwebhooks
    WEBHOOK_SECRET=whsec_... PORT=3000 python3 receiver.py
"""

import os
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

webhook = Webhook(os.environ["WEBHOOK_SECRET"])
MAX_BODY = 1 << 20  # far more than any event


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        try:
            length = int(self.headers.get("content-length", "0"))
            if not 0 <= length <= MAX_BODY:
                raise ValueError(f"a body of {length} bytes")
            # Verify the raw body as it arrived: parsing and re-serialising would change the bytes.
            body = self.rfile.read(length)
            # Raises unless a `webhook-signature` matches and `webhook-timestamp` is within 5
            # minutes; a malformed header or a body that is not UTF-8 raises a ValueError.
            event = webhook.verify(body, dict(self.headers))
        except (WebhookVerificationError, ValueError) as e:
            print(f"refused: {e}", flush=True)
            self.send_response(400)
            self.end_headers()
            return
        # Deliveries are at least once: `webhook-id` is the event id, the same on every attempt,
        # so keep the ids you have handled; `sequence` orders the events of one resource.
        data_id = event["data"].get("id", "")
        print(f"verified {event['type']} {self.headers['webhook-id']} {data_id} {event.get('sequence', '')}", flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "3000"))), Receiver)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
