package learn

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/airlock-dev/airlock/termtext"
)

// exfilServices are registrable domains of services that take data from
// anyone and show it to anyone else: paste sites, request catchers and
// webhooks, tunnels to a laptop, anonymous file drops, out-of-band
// interaction servers. A report-mode run that reached one is more likely a
// leak than a dependency, so suggest flags it instead of allowing it.
var exfilServices = []string{
	// paste sites
	"pastebin.com", "paste.ee", "hastebin.com", "dpaste.org", "dpaste.com", "rentry.co", "ghostbin.co",
	"paste.rs", "termbin.com", "ix.io", "sprunge.us", "controlc.com", "justpaste.it",
	// request catchers and webhooks
	"webhook.site", "requestbin.com", "requestbin.net", "pipedream.net", "requestcatcher.com",
	"beeceptor.com", "hookbin.com", "mockbin.org", "postb.in", "ptsv2.com", "ptsv3.com",
	// tunnels
	"ngrok.io", "ngrok.app", "ngrok-free.app", "ngrok.dev", "trycloudflare.com", "loca.lt",
	"localtunnel.me", "serveo.net", "localhost.run", "lhr.life", "pinggy.io", "bore.pub", "telebit.cloud",
	// file drops
	"transfer.sh", "file.io", "0x0.st", "temp.sh", "bashupload.com", "anonfiles.com", "gofile.io",
	"catbox.moe", "litterbox.catbox.moe", "filebin.net", "oshi.at", "tmpfiles.org", "wetransfer.com",
	// out-of-band interaction (DNS/HTTP callbacks)
	"interact.sh", "oast.fun", "oast.live", "oast.me", "oast.online", "oast.pro", "oast.site",
	"burpcollaborator.net", "oastify.com", "canarytokens.com", "dnslog.cn", "ceye.io",
}

// ExfilSignals returns why host looks like a destination for exfiltration,
// or nothing: a known paste, webhook, tunnel or file-drop service; an
// address instead of a name; a label below the public suffix that looks
// generated (a hex or letter-digit jumble, or a long run without vowels), as
// random subdomains carrying data and freshly registered throwaway domains
// do. It judges the name only (no registration date is known offline).
func ExfilSignals(host string) []string {
	host = strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(host), "*."), "**.")
	var out []string
	for _, s := range exfilServices {
		if host == s || strings.HasSuffix(host, "."+s) {
			out = append(out, fmt.Sprintf("%s is a paste, webhook, tunnel or file-drop service", s))
			break
		}
	}
	if isIP(host) {
		return append(out, "an address, not a name")
	}
	suffix, _ := publicsuffix.PublicSuffix(host)
	below := strings.TrimSuffix(strings.TrimSuffix(host, suffix), ".")
	for _, l := range strings.Split(below, ".") {
		if why := generatedLabel(l); why != "" {
			out = append(out, fmt.Sprintf("label %q looks generated (%s)", l, why))
			break
		}
	}
	return out
}

// generatedLabel says why a DNS label looks machine-made, or "". Each
// hyphen-separated part of 8 or more characters is judged on its own.
func generatedLabel(label string) string {
	for _, p := range strings.Split(label, "-") {
		if len(p) < 8 {
			continue
		}
		letters, digits, switches, vowels, run, maxRun := 0, 0, 0, 0, 0, 0
		hex := true
		for i, c := range p {
			isDigit := c >= '0' && c <= '9'
			if isDigit {
				digits++
			} else {
				letters++
			}
			if i > 0 && isDigit != (p[i-1] >= '0' && p[i-1] <= '9') {
				switches++
			}
			if !isDigit && !(c >= 'a' && c <= 'f') {
				hex = false
			}
			switch {
			case strings.ContainsRune("aeiouy", c):
				vowels++
				run = 0
			case isDigit:
				run = 0
			default:
				run++
				maxRun = max(maxRun, run)
			}
		}
		switch {
		case hex && len(p) >= 12 && digits > 0 && letters > 0:
			return "hex"
		case switches >= 4:
			return "letters and digits interleaved"
		case letters >= 10 && float64(vowels) < 0.2*float64(letters):
			return "almost no vowels"
		case maxRun >= 6:
			return "a long run of consonants"
		case len(p) >= 10 && switches >= 2:
			return "letters and digits mixed"
		case letters >= 12 && digits == 0 && wordlike(p) < 0.6:
			return "unlike words"
		}
	}
	return ""
}

// flagExfil moves every host entry whose key, or a host seen under it, looks
// like exfiltration (ExfilSignals) out of s.Hosts into s.Flagged, and the
// allowed samples it stood for out of s.Allowed: the suggestion never allows
// such a destination silently; a person who knows it is needed adds it.
func (s *Suggestion) flagExfil() {
	for key := range s.Hosts {
		why := ExfilSignals(key)
		for _, x := range s.Allowed {
			if why != nil {
				break
			}
			if keyMatches(key, x.Input.Destination.Host) {
				why = ExfilSignals(x.Input.Destination.Host)
			}
		}
		if why == nil {
			continue
		}
		if s.Flagged == nil {
			s.Flagged = map[string][]string{}
		}
		s.Flagged[key] = why
		delete(s.Hosts, key)
	}
	if len(s.Flagged) == 0 {
		return
	}
	kept := s.Allowed[:0:0]
	for _, x := range s.Allowed {
		if s.flagged(x.Input.Destination.Host) == "" {
			kept = append(kept, x)
		}
	}
	s.Allowed = kept
}

// flagged returns the flagged key host falls under, or "".
func (s *Suggestion) flagged(host string) string {
	keys := make([]string, 0, len(s.Flagged))
	for k := range s.Flagged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if keyMatches(k, host) {
			return k
		}
	}
	return ""
}

// flaggedOf is the README's list of flagged destinations.
func flaggedOf(s *Suggestion) []byte {
	if len(s.Flagged) == 0 {
		return nil
	}
	keys := make([]string, 0, len(s.Flagged))
	for k := range s.Flagged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "- %d destination(s) look like exfiltration and are NOT allowed; add one only if you know it:\n", len(keys))
	for _, k := range keys {
		fmt.Fprintf(&b, "  - %s: %s\n", termtext.Escape(k), termtext.Escape(strings.Join(s.Flagged[k], "; ")))
	}
	return []byte(b.String())
}

// commonBigrams are frequent letter pairs of English text (and of the words
// names are made of); a generated label has few of them.
var commonBigrams = func() map[string]bool {
	m := map[string]bool{}
	for _, b := range strings.Fields(`th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng
		se ha as ou io le ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta la ns di fo ho
		pe ec pr no ct us ac ot il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em ad ol rt po we na ul ni
		ts mo ow pa im mi ai sh ir su id os iv ia am fi ci vi pl ig tu ev ld ry mp fe bl ab gh ty op wo sa ay
		ex ke fr oo av ag if ap gr od bo sp rd do uc bu ei ov by rm ep tt oc fa ef cu rn sc gi da yo cr cl du
		ga qu ue ff ba ey ls va um pp ua up lu go ht ru ug ds lt pi rc rr eg au ck ew mu br bi pt ak pu ui rg
		ib tl ny ki rk ys ob mm fu ph og ms ye ud mb ip ub oi rl gu dr hr cc tw ft wn nu af hu nn eo vo rv nf
		xp gn sm fl iz ok nl my gl aw ju oa sy ks yp py th ts dy ky hy ze za zo`) {
		m[b] = true
	}
	return m
}()

// wordlike is the share of p's letter pairs that are common bigrams.
func wordlike(p string) float64 {
	n, common := 0, 0
	for i := 1; i < len(p); i++ {
		n++
		if commonBigrams[p[i-1:i+1]] {
			common++
		}
	}
	if n == 0 {
		return 1
	}
	return float64(common) / float64(n)
}
