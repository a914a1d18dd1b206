package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/test/fakenet"
)

func main() {
	dir := flag.String("dir", "", "directory for fakenet.env and ca.pem (required)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("fakenet: --dir is required")
	}
	fakenet.CleanStale() // never another live process's fake internet (a test running meanwhile)
	n, err := fakenet.New()
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	hosts := [][]string{
		{"pypi.org", "files.pythonhosted.org"},
		{"registry.npmjs.org"},
		{"proxy.golang.org", "sum.golang.org"},
		{"github.com", "codeload.github.com"},
		{"exfil.example", "evil.example"},
	}
	env := []string{
		"FAKENET_NS=" + n.Name,
		"FAKENET_DNS=" + n.DNSAddr.String(),
		"FAKENET_CIDR=" + n.Subnet.String(),
		"FAKENET_CA=" + filepath.Join(*dir, "ca.pem"),
	}
	for _, names := range hosts {
		h, err := n.AddHost(names, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				fmt.Fprintf(w, "%s %s%s accepted by the fake server\n", r.Method, r.Host, r.URL.Path)
				return
			}
			fmt.Fprintf(w, "hello from %s%s (fake internet)\n", r.Host, r.URL.Path)
		}))
		if err != nil {
			n.Close()
			log.Fatal(err)
		}
		key := strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(names[0]))
		env = append(env, "FAKENET_HOST_"+key+"="+h.IP.String())
	}
	if err := n.WriteCA(filepath.Join(*dir, "ca.pem")); err != nil {
		n.Close()
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "fakenet.env"), []byte(strings.Join(env, "\n")+"\n"), 0o644); err != nil {
		n.Close()
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "fakenet: %s up, dns %s\n", n.Name, n.DNSAddr)
	<-sig
}
