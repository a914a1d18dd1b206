// Package learn turns audit records back into policy inputs: it rebuilds the
// input of every decision a record stands for (input.go), replays them against
// one or two policies to show what a change would allow or deny (replay.go),
// and suggests a policy directory from what a report-mode run did (suggest.go,
// write.go; hosts reached only over HTTP(S) as an http_allow table,
// httpallow.go; destinations that look like exfiltration flagged and left
// out, exfil.go). It backs `airlock policy suggest|replay|diff`.
//
// Entry points: Rebuilder, Replay, Collect and Suggest. What a rebuilt input
// lacks (header and query values, the body size), the wildcard threshold and
// the public-suffix rule: policy/DESIGN.md, "Policy from the log".
//
// policy/learn must never import: gateway, dnsfilter, netns, sandboxd, daemon,
// secrets, config, cmd/airlock.
package learn
