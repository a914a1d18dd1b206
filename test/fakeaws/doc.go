// Package fakeaws serves fake S3 and STS endpoints for tests of airlock's AWS
// SigV4 bindings. Every request must be signed with the REAL credentials the
// test gave the server; the signature is checked with the AWS SDK for Go's
// own signer (aws-sdk-go-v2/aws/signer/v4), an implementation independent of
// package secrets, so the gateway's re-signing is not checked by itself. A
// request that does not verify is answered 403 SignatureDoesNotMatch, naming
// the access key id as S3 does (which lets tests check it is scrubbed).
// Every request is recorded (Requests) so tests can assert what the target
// saw and never saw. Only tests import it.
//
// Entry points: New, (*Server).ServeHTTP, (*Server).Requests.
//
// test/fakeaws must never import: any other airlock package.
package fakeaws
