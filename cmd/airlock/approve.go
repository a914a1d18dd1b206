package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/termtext"
)

// approveOptions are the flags of `airlock approve`.
type approveOptions struct {
	once, sandbox, policy, deny bool
	list, json                  bool
}

func newApproveCmd() *cobra.Command {
	var o approveOptions
	cmd := &cobra.Command{
		Use:   "approve [ID] [flags]",
		Short: "Answer requests the policy holds for a person (ask rules, on_unmatched ask)",
		Long: `approve answers the requests a sandbox made that the policy asked a person
about (an ask rule, or on_unmatched := "ask"): each is held, connection and all,
until an answer, approval.timeout (then denied: approval_timeout), or the
sandbox's end. Root answers for every sandbox; any other caller for the
sandboxes it owns. A process inside the sandbox never may.

Without an ID it is interactive: it shows each pending request (sandbox,
method, host, port, path and the policy's question) as it comes and reads one
key: o once (this request), s sandbox (this host and port for the sandbox's
life), p policy (add host:port to the sandbox's allow list), d deny, n next
(leave it), q quit. On a terminal the key needs no Enter.

With an ID it answers that one: --allow-once, --allow-sandbox, --allow-policy
or --deny. --list prints the pending ones and exits (--json: the API's
objects). Every answer is audited with who gave it.`,
		Example: `  airlock approve
  airlock approve --list
  airlock approve ap-3f2a9c0d1e2b4a5c --allow-once
  airlock approve ap-3f2a9c0d1e2b4a5c --deny`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := newClient(cmd)
			defer c.Close()
			switch {
			case len(args) == 1:
				return answerOne(cmd, c, args[0], o)
			case o.once || o.sandbox || o.policy || o.deny:
				return usageError("--allow-once, --allow-sandbox, --allow-policy and --deny need the approval's ID")
			case o.list:
				return listApprovals(cmd, c, o.json)
			}
			return approveInteractive(cmd, c)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.once, "allow-once", false, "let this one request pass")
	f.BoolVar(&o.sandbox, "allow-sandbox", false, "let it and the sandbox's later requests to the same host and port pass, for the sandbox's life")
	f.BoolVar(&o.policy, "allow-policy", false, "let it pass and add host:port to the sandbox's allow list")
	f.BoolVar(&o.deny, "deny", false, "refuse it")
	f.BoolVar(&o.list, "list", false, "print the pending approvals and exit")
	f.BoolVar(&o.json, "json", false, "with --list: print the API's Approval objects")
	return cmd
}

// answerOne answers approval id as exactly one flag says.
func answerOne(cmd *cobra.Command, c *client.Client, id string, o approveOptions) error {
	var answers []string
	for _, a := range []struct {
		set    bool
		answer string
	}{{o.once, api.AnswerOnce}, {o.sandbox, api.AnswerSandbox}, {o.policy, api.AnswerPolicy}, {o.deny, api.AnswerDeny}} {
		if a.set {
			answers = append(answers, a.answer)
		}
	}
	if len(answers) != 1 {
		return usageError("give exactly one of --allow-once, --allow-sandbox, --allow-policy, --deny")
	}
	a, err := c.AnswerApproval(cmd.Context(), id, answers[0])
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", a.ID, a.State, describeApproval(*a))
	return nil
}

func listApprovals(cmd *cobra.Command, c *client.Client, asJSON bool) error {
	list, err := c.Approvals(cmd.Context())
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), list)
	}
	for _, a := range list {
		fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  %s  (expires in %s)\n", a.ID, termtext.Escape(a.Sandbox), describeApproval(a),
			time.Until(a.ExpiresAt).Round(time.Second))
	}
	return nil
}

// describeApproval is one line about a: what the sandbox asked for and
// the policy's question, every string from the sandbox escaped.
func describeApproval(a api.Approval) string {
	what := a.Kind
	if a.Method != "" {
		what = a.Method
	}
	s := fmt.Sprintf("%s %s:%d%s", what, a.Host, a.Port, a.Path)
	if a.Msg != "" {
		s += " — " + a.Msg
	}
	return termtext.Escape(s)
}

// approveKeys maps a key to its answer.
var approveKeys = map[byte]string{'o': api.AnswerOnce, 's': api.AnswerSandbox, 'p': api.AnswerPolicy, 'd': api.AnswerDeny}

// approveInteractive shows pending approvals one at a time and answers
// each with a key.
func approveInteractive(cmd *cobra.Command, c *client.Client) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	st, err := c.FollowApprovals(ctx)
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	defer st.Close()
	out := cmd.OutOrStdout()
	keys, restore := readKeys(cmd.InOrStdin())
	if restore != nil {
		defer restore()
		out = crlf{out}
	}
	events := make(chan api.Approval)
	streamErr := make(chan error, 1)
	go func() {
		for {
			a, err := st.Next()
			if err != nil {
				streamErr <- err
				return
			}
			select {
			case events <- a:
			case <-ctx.Done():
				return
			}
		}
	}()
	var queue []api.Approval
	prompted := ""
	fmt.Fprintln(out, "waiting for requests to approve (q quits)")
	for {
		if len(queue) > 0 && queue[0].ID != prompted {
			prompted = queue[0].ID
			fmt.Fprintf(out, "\n%s sandbox %s: %s\n  [o]nce [s]andbox [p]olicy [d]eny [n]ext [q]uit? ", queue[0].ID,
				termtext.Escape(queue[0].Sandbox), describeApproval(queue[0]))
		}
		select {
		case a := <-events:
			queue = applyApproval(queue, a)
			if a.State != api.ApprovalPending && a.ID == prompted {
				fmt.Fprintf(out, "\n%s %s by %s\n", a.ID, a.State, termtext.Escape(a.By))
				prompted = ""
			}
		case err := <-streamErr:
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return &exitError{Code: exitFailed, Msg: err.Error()}
		case k, ok := <-keys:
			if !ok || k == 'q' || k == 3 || k == 4 { // q, Ctrl-C, Ctrl-D
				fmt.Fprintln(out)
				return nil
			}
			if len(queue) == 0 {
				continue
			}
			if k == 'n' {
				queue = append(queue[1:], queue[0])
				prompted = ""
				continue
			}
			answer, ok := approveKeys[k]
			if !ok {
				continue
			}
			head := queue[0]
			queue, prompted = queue[1:], ""
			if a, err := c.AnswerApproval(cmd.Context(), head.ID, answer); err != nil {
				fmt.Fprintf(out, "%c\n%s: %v\n", k, head.ID, err)
			} else {
				fmt.Fprintf(out, "%c\n%s %s (%s)\n", k, a.ID, a.State, a.Answer)
			}
		}
	}
}

// applyApproval keeps queue the pending approvals after a.
func applyApproval(queue []api.Approval, a api.Approval) []api.Approval {
	for i, q := range queue {
		if q.ID == a.ID {
			if a.State == api.ApprovalPending {
				return queue
			}
			return append(queue[:i:i], queue[i+1:]...)
		}
	}
	if a.State == api.ApprovalPending {
		queue = append(queue, a)
	}
	return queue
}

// readKeys delivers in's keys: one byte at a time from a terminal put in
// raw mode (restore puts it back; nil when in is not a terminal), else
// the first byte of each line.
func readKeys(in io.Reader) (<-chan byte, func()) {
	keys := make(chan byte)
	f, isFile := in.(*os.File)
	if isFile && term.IsTerminal(int(f.Fd())) {
		if old, err := term.MakeRaw(int(f.Fd())); err == nil {
			go func() {
				defer close(keys)
				b := make([]byte, 1)
				for {
					if _, err := f.Read(b); err != nil {
						return
					}
					keys <- b[0]
				}
			}()
			return keys, func() { _ = term.Restore(int(f.Fd()), old) }
		}
	}
	go func() {
		defer close(keys)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				keys <- line[0]
			}
		}
	}()
	return keys, nil
}

// crlf writes \r\n for \n (a terminal in raw mode).
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	if _, err := c.w.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
