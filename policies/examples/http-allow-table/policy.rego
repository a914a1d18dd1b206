# Read acme's GitHub repositories and call OpenAI's chat completions, nothing
# else. The library derives DNS, CONNECT/TLS on 443 and interception for both
# hosts from this table, so the method and path rules always take effect.
# "Nothing else": airlock-policy.yaml beside this file builds on no preset.
package airlock.egress

http_allow := {
	"api.github.com": [{"methods": ["GET"], "paths": ["/repos/acme/*"]}],
	"api.openai.com": [{"methods": ["POST"], "paths": ["/v1/chat/completions"]}],
}
