// Command grpcclient is the Go gRPC client the end-to-end tests run inside
// `airlock run`: it calls grpc.health.v1.Health's Check (unary) or Watch
// (server streaming) on host:443 over TLS, trusting the system roots (the
// sandbox's SSL_CERT_FILE), through HTTPS_PROXY when it is set, and prints one
// key=value line: NAME=SERVING, or NAME_error=CODE.
//
// test/e2e/grpcclient must never import: audit, cmd/airlock, daemon, dnsfilter, gateway, netns, policy, sandboxd, secrets.
package main
