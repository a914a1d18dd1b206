// Package bundletest is test support for policy bundles: NewKey makes an
// ECDSA signing key, Build writes an OPA bundle tarball with OPA's own bundle
// writer (signed when given a key, optionally tampered with after signing),
// and NewServer serves bundles on loopback as an OPA bundle server does: an
// ETag per bundle, 304 for a matching If-None-Match, long polling, and
// counts of what it answered. Only tests import it.
//
// Entry points: NewKey, Build, NewServer.
//
// policy/bundletest must never import: policy, audit, config, secrets,
// gateway, dnsfilter, netns, sandboxd, daemon, cmd/airlock.
package bundletest
