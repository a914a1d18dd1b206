# Per-sandbox allowlists by label: a sandbox labelled team=ml may reach the ML
# team's hosts, team=web the web team's, and so on (data.json). The lookup is by
# key, so each team's list can hold any number of hosts at the same cost.
package airlock.egress

import data.airlock

# Any method and kind except raw TCP to a host on the sandbox's team list, on
# the ports its entry names (true: 443 and 80).
allow if {
	input.kind != "tcp"
	airlock.host_in(data.team_hosts[input.sandbox.labels.team])
}

# Write methods to team hosts go through TLS interception so they are logged
# with their method and path.
mitm if {
	input.kind in {"connect", "tls"}
	airlock.host_in(data.team_hosts[input.sandbox.labels.team])
}
