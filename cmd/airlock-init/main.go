package main

import (
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/sandboxd"
)

func main() {
	// A rootless sandbox's init builds its island through netns.
	sandboxd.InitMainWith(sandboxd.InitHooks{Island: netns.BuildIsland})
}
