#!/usr/bin/env node
// Verify every Sigstore bundle that refers to an image, with sigstore-js alone.
//
// An implementation apart from the release pipeline (which is Python): it reads the registry
// over the OCI distribution API with plain HTTP requests (anonymous, as an outsider would;
// http:// for a loopback registry, https:// otherwise) and verifies with sigstore-js
// (@sigstore/verify). From the image digest alone it finds the referrers (the referrers API,
// else the referrers tag schema's `sha256-<hex>` index) and, for each Sigstore bundle v0.3
// among them, checks that:
//   - its manifest is digest-checked, its subject is the image and its one layer the bundle;
//   - the bundle verifies: with --key, its DSSE signature with that public key (a key-signed
//     release logs nowhere, so no transparency-log entry or timestamp is required); with
//     --certificate-identity and --certificate-oidc-issuer, the Fulcio certificate chain,
//     the SCT, the Rekor entry and the identity, against Sigstore's trusted root;
//   - the signed in-toto statement's subject is the image, and its predicateType is the
//     one the manifest's annotation names;
//   - a SLSA verification summary (the release's self-check: the release audits its own
//     records and signs the result with its own signer) says verificationResult PASSED.
// It prints one line per bundle and exits 0 only when every one verified (and there was one).
//
//   node verify_referrers.mjs HOST/REPOSITORY@sha256:HEX --key release.pub.pem
//   node verify_referrers.mjs HOST/REPOSITORY@sha256:HEX \
//       --certificate-identity SAN --certificate-oidc-issuer ISSUER [--offline]
//   node verify_referrers.mjs --bundle FILE --digest sha256:HEX (--key ... | --certificate-identity ...)
//
// --offline uses the trusted root sigstore-js ships (@sigstore/tuf's seed of Sigstore's TUF
// repository) instead of refreshing it from that repository; --trusted-root FILE names one.
// --bundle verifies one bundle file against a subject digest, with no registry.

import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';

import { bundleFromJSON } from '@sigstore/bundle';
import { TrustedRoot } from '@sigstore/protobuf-specs';
import { getTrustedRoot } from '@sigstore/tuf';
import { Verifier, toSignedEntity, toTrustMaterial } from '@sigstore/verify';

const BUNDLE_TYPE = 'application/vnd.dev.sigstore.bundle.v0.3+json';
const VSA_TYPE = 'https://slsa.dev/verification_summary/v1';
const EMPTY_DIGEST = 'sha256:' + crypto.createHash('sha256').update('{}').digest('hex');
const MANIFEST_TYPES = [
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
].join(', ');
const PUBLIC_GOOD_TUF = 'https://tuf-repo-cdn.sigstore.dev';

class Refused extends Error {}

function sha256(bytes) {
  return 'sha256:' + crypto.createHash('sha256').update(bytes).digest('hex');
}

// ------------------------------------------------------------------ the registry, over HTTP

function parseReference(text) {
  const m = /^([^/]+)\/([a-z0-9._\/-]+)@(sha256:[0-9a-f]{64})$/.exec(text);
  if (!m) throw new Refused(`not a reference pinned by digest: ${text} (expected HOST/REPOSITORY@sha256:HEX)`);
  const host = m[1];
  const loopback = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/.test(host);
  return { base: `${loopback ? 'http' : 'https'}://${host}`, repository: m[2], digest: m[3] };
}

class Registry {
  constructor(base, repository) {
    this.base = base;
    this.repository = repository;
    this.token = null;
  }

  // One GET; an anonymous bearer token is fetched when the registry asks for one.
  async get(path, accept) {
    for (let round = 0; round < 2; round++) {
      const headers = { Accept: accept };
      if (this.token) headers.Authorization = `Bearer ${this.token}`;
      const resp = await fetch(`${this.base}/v2/${this.repository}/${path}`, { headers });
      if (resp.status === 401 && !this.token && (await this.authenticate(resp))) continue;
      return { status: resp.status, type: (resp.headers.get('content-type') || '').split(';')[0].trim(),
               body: Buffer.from(await resp.arrayBuffer()) };
    }
    throw new Refused(`${this.base}: anonymous access to ${this.repository} was refused`);
  }

  async authenticate(resp) {
    const challenge = resp.headers.get('www-authenticate') || '';
    if (!/^bearer /i.test(challenge)) return false;
    const params = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1].toLowerCase(), m[2]]));
    const url = new URL(params.realm);
    for (const k of ['service', 'scope']) if (params[k]) url.searchParams.set(k, params[k]);
    const answer = await fetch(url);
    if (!answer.ok) return false;
    const doc = await answer.json();
    this.token = doc.token || doc.access_token;
    return Boolean(this.token);
  }

  // A manifest by digest: its bytes must hash to the digest.
  async manifest(digest) {
    const r = await this.get(`manifests/${digest}`, MANIFEST_TYPES);
    if (r.status !== 200) throw new Refused(`manifest ${digest}: HTTP ${r.status}`);
    if (sha256(r.body) !== digest) throw new Refused(`manifest ${digest}: the registry served other bytes (${sha256(r.body)})`);
    return { doc: JSON.parse(r.body), type: r.type, size: r.body.length };
  }

  async blob(digest) {
    const r = await this.get(`blobs/${digest}`, '*/*');
    if (r.status !== 200) throw new Refused(`blob ${digest}: HTTP ${r.status}`);
    if (sha256(r.body) !== digest) throw new Refused(`blob ${digest}: the registry served other bytes (${sha256(r.body)})`);
    return r.body;
  }

  // The referrers API, else the referrers tag schema (`sha256-<hex>`); [] when neither lists any.
  async referrers(digest) {
    const api = await this.get(`referrers/${digest}`, 'application/vnd.oci.image.index.v1+json');
    if (api.status === 200) return { foundBy: 'referrers API', manifests: JSON.parse(api.body).manifests || [] };
    if (api.status !== 404) throw new Refused(`referrers of ${digest}: HTTP ${api.status}`);
    const tag = digest.replace(':', '-');
    const r = await this.get(`manifests/${tag}`, MANIFEST_TYPES);
    if (r.status === 404) return { foundBy: `tag ${tag}`, manifests: [] };
    if (r.status !== 200) throw new Refused(`referrers tag ${tag}: HTTP ${r.status}`);
    return { foundBy: `tag ${tag}`, manifests: JSON.parse(r.body).manifests || [] };
  }
}

// ------------------------------------------------------------------ sigstore-js

async function trustedRoot(opts) {
  if (opts['trusted-root']) return TrustedRoot.fromJSON(JSON.parse(fs.readFileSync(opts['trusted-root'])));
  if (opts.offline) {
    const seeds = createRequire(import.meta.url)('@sigstore/tuf/seeds.json');
    return TrustedRoot.fromJSON(JSON.parse(Buffer.from(seeds[PUBLIC_GOOD_TUF].targets['trusted_root.json'], 'base64')));
  }
  return getTrustedRoot();
}

async function makeVerifier(opts) {
  if (opts.key) {
    // The key the auditor was given, whatever the bundle's (unauthenticated) hint says.
    const publicKey = crypto.createPublicKey(fs.readFileSync(opts.key));
    const noRoot = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
    const trust = toTrustMaterial(noRoot, () => ({ publicKey, validFor: () => true }));
    const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
    return (bundle) => {
      if (bundle.verificationMaterial.content.$case !== 'publicKey') {
        throw new Refused('the bundle is not key-signed (it carries a certificate): verify it with --certificate-identity');
      }
      return verifier.verify(toSignedEntity(bundle));
    };
  }
  const identity = opts['certificate-identity'];
  const issuer = opts['certificate-oidc-issuer'];
  if (!identity || !issuer) throw new Refused('give --key FILE, or --certificate-identity and --certificate-oidc-issuer');
  const verifier = new Verifier(toTrustMaterial(await trustedRoot(opts)));
  return (bundle) => verifier.verify(toSignedEntity(bundle), { subjectAlternativeName: identity, extensions: { issuer } });
}

// Verify one bundle's bytes; return its statement. `digest` is what it must attest.
function verifyBundle(verify, bytes, digest, annotatedType) {
  let doc;
  try {
    doc = JSON.parse(bytes);
  } catch (e) {
    throw new Refused(`not JSON: ${e.message}`);
  }
  if (doc.mediaType !== BUNDLE_TYPE) throw new Refused(`bundle media type ${doc.mediaType}, expected ${BUNDLE_TYPE}`);
  const bundle = bundleFromJSON(doc);
  if (bundle.content.$case !== 'dsseEnvelope') throw new Refused('the bundle holds no DSSE envelope');
  verify(bundle);
  const envelope = bundle.content.dsseEnvelope;
  if (envelope.payloadType !== 'application/vnd.in-toto+json') throw new Refused(`payload type ${envelope.payloadType}`);
  const statement = JSON.parse(Buffer.from(envelope.payload));
  const subject = (statement.subject || [])[0] || {};
  const want = digest.replace(/^sha256:/, '');
  if ((subject.digest || {}).sha256 !== want) {
    throw new Refused(`the signed statement is about sha256:${(subject.digest || {}).sha256}, not ${digest}`);
  }
  if (annotatedType !== undefined && statement.predicateType !== annotatedType) {
    throw new Refused(`annotated predicateType ${annotatedType}, signed ${statement.predicateType}`);
  }
  if (statement.predicateType === VSA_TYPE && statement.predicate?.verificationResult !== 'PASSED') {
    throw new Refused(`the verification summary says ${statement.predicate?.verificationResult}, not PASSED`);
  }
  return statement;
}

async function verifyImage(verify, reference) {
  const ref = parseReference(reference);
  const registry = new Registry(ref.base, ref.repository);
  await registry.manifest(ref.digest);
  const { foundBy, manifests } = await registry.referrers(ref.digest);
  const bundles = manifests.filter((d) => d.artifactType === BUNDLE_TYPE);
  if (bundles.length === 0) throw new Refused(`no Sigstore bundle refers to ${reference} (${foundBy})`);
  let failed = 0;
  for (const desc of bundles) {
    try {
      const { doc } = await registry.manifest(desc.digest);
      if (doc.subject?.digest !== ref.digest) throw new Refused(`its manifest's subject is ${doc.subject?.digest}, not the image`);
      if (doc.artifactType !== BUNDLE_TYPE) throw new Refused(`artifactType ${doc.artifactType}`);
      if (doc.config?.digest !== EMPTY_DIGEST) throw new Refused(`config ${doc.config?.digest} is not the empty descriptor`);
      if (doc.layers?.length !== 1 || doc.layers[0].mediaType !== BUNDLE_TYPE) throw new Refused('not one bundle layer');
      const annotations = doc.annotations || {};
      if (annotations['dev.sigstore.bundle.content'] !== 'dsse-envelope') throw new Refused('content annotation is not dsse-envelope');
      const bytes = await registry.blob(doc.layers[0].digest);
      const statement = verifyBundle(verify, bytes, ref.digest, annotations['dev.sigstore.bundle.predicateType']);
      console.log(`OK ${statement.predicateType} ${desc.digest} (${foundBy})`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${desc.digest} (${foundBy}): ${e.message}`);
    }
  }
  console.log(`${bundles.length - failed} of ${bundles.length} Sigstore bundles referring to ${ref.digest} verified`);
  return failed === 0;
}

async function main() {
  const { values: opts, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      key: { type: 'string' },
      'certificate-identity': { type: 'string' },
      'certificate-oidc-issuer': { type: 'string' },
      'trusted-root': { type: 'string' },
      offline: { type: 'boolean' },
      bundle: { type: 'string' },
      digest: { type: 'string' },
    },
  });
  const verify = await makeVerifier(opts);
  if (opts.bundle) {
    if (!/^sha256:[0-9a-f]{64}$/.test(opts.digest || '')) throw new Refused('--bundle needs --digest sha256:HEX');
    const statement = verifyBundle(verify, fs.readFileSync(opts.bundle), opts.digest);
    console.log(`OK ${statement.predicateType} ${opts.bundle}`);
    return true;
  }
  if (positionals.length !== 1) throw new Refused('name one image: HOST/REPOSITORY@sha256:HEX');
  return verifyImage(verify, positionals[0]);
}

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (e) => {
    console.log(`FAIL ${e instanceof Refused ? '' : `${e.name}: `}${e.message}`);
    process.exit(1);
  },
);
