package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
)

// updateOptions are the flags of `airlock sandbox update`.
type updateOptions struct {
	allow, removeAllow   []string
	clearAllow           bool
	labels, removeLabels []string
	mode                 string
	json                 bool
}

func newSandboxUpdateCmd() *cobra.Command {
	var o updateOptions
	cmd := &cobra.Command{
		Use:   "update ID [flags]",
		Short: "Change a running sandbox's allow list, labels or mode",
		Long: `update changes one running sandbox's own rules and nothing else: the hosts it
may reach beside the policy (--allow adds, --remove-allow removes, --clear-allow
empties the list first), its labels (which policy and secret bindings match)
and, for root, its mode. Entries are checked as at create. The daemon audits
the change with who made it and the old and new rules; the sandbox's next
request is decided under the new rules, and its open tunnels and websockets
that they refuse are closed. It prints the sandbox as inspect does.`,
		Example: `  airlock sandbox update sb-1a2b3c --allow pypi.org --allow files.pythonhosted.org
  airlock sandbox update sb-1a2b3c --remove-allow pypi.org --label stage=review
  airlock sandbox update sb-1a2b3c --clear-allow --allow api.openai.com
  sudo airlock sandbox update sb-1a2b3c --mode report`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runSandboxUpdate(cmd, args[0], o) },
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.allow, "allow", nil, "add HOST, HOST:PORT, *.domain or **.domain to the sandbox's allow list, written as enforced (repeatable)")
	f.StringArrayVar(&o.removeAllow, "remove-allow", nil, "remove an entry from the allow list, as listed (repeatable)")
	f.BoolVar(&o.clearAllow, "clear-allow", false, "empty the allow list before --allow adds to it")
	f.StringArrayVar(&o.labels, "label", nil, "set label KEY=VALUE (repeatable)")
	f.StringArrayVar(&o.removeLabels, "remove-label", nil, "remove label KEY (repeatable)")
	f.StringVar(&o.mode, "mode", "", "enforce or report (root only)")
	f.BoolVar(&o.json, "json", false, "print the sandbox as JSON (the API's Sandbox object)")
	return cmd
}

func runSandboxUpdate(cmd *cobra.Command, id string, o updateOptions) error {
	req, err := o.request()
	if err != nil {
		return err
	}
	c := newClient(cmd)
	defer c.Close()
	sb, err := c.UpdateSandbox(cmd.Context(), id, req)
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	if o.json {
		return printJSON(cmd.OutOrStdout(), sb)
	}
	return printSandboxFields(cmd.OutOrStdout(), sb)
}

// request is the PATCH the flags ask for.
func (o updateOptions) request() (api.UpdateSandboxRequest, error) {
	req := api.UpdateSandboxRequest{AllowAdd: o.allow, AllowRemove: o.removeAllow, Mode: o.mode}
	if o.clearAllow {
		req.Allow = &[]string{}
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return req, usageError("%v", err)
	}
	if len(labels)+len(o.removeLabels) > 0 {
		req.Labels = map[string]*string{}
		for k, v := range labels {
			req.Labels[k] = &v
		}
		for _, k := range o.removeLabels {
			if k == "" || strings.Contains(k, "=") {
				return req, usageError("--remove-label %q: give the label's KEY alone", k)
			}
			if _, set := req.Labels[k]; set {
				return req, usageError("label %q is both set and removed", k)
			}
			req.Labels[k] = nil
		}
	}
	if req.Empty() {
		return req, usageError("nothing to change: give --allow, --remove-allow, --clear-allow, --label, --remove-label or --mode")
	}
	return req, nil
}
