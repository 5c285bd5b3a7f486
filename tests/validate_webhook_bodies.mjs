// Validates customer webhook bodies against the `webhooks` section of docs/openapi.json with
// Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1), formats included.
// Usage: node tests/validate_webhook_bodies.mjs FILE, where FILE is JSON: {"bodies": ["...", ...],
// "catalog": <the answer of GET /v1/event_types>?}. With a catalog, each body must also pass the
// schema the catalog serves for its type, compiled on its own (it is self-contained).
// Prints one line per body ("ok <id> <type>" or "FAILED <n> <type>: <why>") and exits 1 if any
// body fails, or if the document itself does not compile.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const doc = JSON.parse(readFileSync(new URL("../docs/openapi.json", import.meta.url), "utf8"));
const { bodies, catalog } = JSON.parse(readFileSync(process.argv[2], "utf8"));

// The document's schemas as one JSON Schema: `components/schemas/X` becomes `$defs/X` (every
// `$ref` rewritten to match) and each webhook's body schema `$defs/webhook:<type>`, so the root
// is itself a schema and compiles whole.
const rewrite = (value) => {
  if (Array.isArray(value)) return value.map(rewrite);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      k === "$ref" && typeof v === "string" ? v.replace("#/components/schemas/", "#/$defs/") : rewrite(v),
    ]),
  );
};
const $defs = rewrite(doc.components?.schemas ?? {});
for (const [type, item] of Object.entries(doc.webhooks ?? {})) {
  $defs[`webhook:${type}`] = rewrite(item.post.requestBody.content["application/json"].schema);
}
// Strict: an unknown keyword (a typo such as `additionalproperties`) fails the compile instead
// of passing every body.
const ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true });
addFormats(ajv);
ajv.addSchema({ $id: "urn:exactly:openapi", $defs });
const validators = new Map(
  Object.keys(doc.webhooks ?? {}).map((type) => [type, ajv.compile({ $ref: `urn:exactly:openapi#/$defs/webhook:${type}` })]),
);

const served = new Map((catalog?.data ?? []).map((entry) => [entry.type, ajv.compile(entry.schema)]));

let failed = 0;
bodies.forEach((text, n) => {
  let body;
  try {
    body = JSON.parse(text);
  } catch (e) {
    failed += 1;
    console.log(`FAILED ${n} (not JSON): ${e.message}`);
    return;
  }
  const validate = validators.get(body?.type);
  if (!validate) {
    failed += 1;
    console.log(`FAILED ${n} ${body?.type}: no webhooks entry for this type`);
    return;
  }
  const fromCatalog = served.get(body.type);
  if (catalog && !fromCatalog) {
    failed += 1;
    console.log(`FAILED ${n} ${body.type}: GET /v1/event_types serves no schema for this type`);
    return;
  }
  if (fromCatalog && !fromCatalog(body)) {
    failed += 1;
    const why = fromCatalog.errors.map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
    console.log(`FAILED ${n} ${body.type} (GET /v1/event_types's schema): ${why.join("; ")}`);
    return;
  }
  if (validate(body)) {
    console.log(`ok ${body.id} ${body.type}`);
  } else {
    failed += 1;
    const why = validate.errors.map((e) => `${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
    console.log(`FAILED ${n} ${body.type}: ${why.join("; ")}`);
  }
});
process.exit(failed ? 1 : 0);
