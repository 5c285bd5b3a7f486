// A receiver of exactly's webhooks in Node.js, verified with the official Standard Webhooks
// library. Run it with the endpoint's secret (shown once, when the endpoint is created):
//
//   npm install standardwebhooks
//   WEBHOOK_SECRET=whsec_... PORT=3000 node receiver.mjs
import http from 'node:http';
import { Webhook } from 'standardwebhooks';

const webhook = new Webhook(process.env.WEBHOOK_SECRET);

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    // Verify the raw body as it arrived: parsing and re-serialising would change the bytes.
    const body = Buffer.concat(chunks).toString('utf8');
    let event;
    try {
      // Throws unless a `webhook-signature` matches and `webhook-timestamp` is within 5 minutes.
      event = webhook.verify(body, req.headers);
    } catch (e) {
      console.log(`refused: ${e.message}`);
      res.writeHead(400).end();
      return;
    }
    // Deliveries are at least once: `webhook-id` is the event id, the same on every attempt, so
    // keep the ids you have handled; `sequence` orders the events of one resource.
    console.log(`verified ${event.type} ${req.headers['webhook-id']} ${event.data.id ?? ''} ${event.sequence ?? ''}`);
    res.writeHead(204).end();
  });
});

server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  console.log(`listening on ${server.address().port}`);
});
