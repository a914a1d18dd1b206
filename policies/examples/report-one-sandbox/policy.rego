# Report mode for one sandbox: the trial sandbox's denials are logged but let
# through, every other sandbox is enforced. A label works the same way, so a
# launcher can opt a sandbox in with --label airlock.mode=report. A policy
# error is never let through, in any mode.
package airlock.egress

report if input.sandbox.id == "sb-trial"

report if input.sandbox.labels["airlock.mode"] == "report"

# A sandbox labelled airlock.mode=enforce stays enforced even when the gateway
# runs globally in report mode.
enforce if input.sandbox.labels["airlock.mode"] == "enforce"
