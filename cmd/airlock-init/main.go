package main

import "github.com/airlock-dev/airlock/sandboxd"

func main() {
	sandboxd.InitMain()
}
