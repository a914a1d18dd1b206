package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/test/ociimage"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding airlock and airlock-cni (make build)")
	layout := flag.String("layout", "", "write an OCI image layout to this directory")
	ref := flag.String("ref", "0.1.0", "the image's tag in the layout's index.json")
	rootfs := flag.String("rootfs", "", "write the image's files to this (empty or new) directory instead")
	packages := flag.String("packages", "", "the Debian packages the caller installed (the Containerfile's PACKAGES); must be the image's list")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: mkimage [-bin DIR] (-layout DIR [-ref TAG] | -rootfs DIR [-packages LIST])\n\n"+
			"Assembles airlock's image from bin/ and the files of these installed Debian packages:\n  %s\n\n",
			strings.Join(ociimage.Packages, " "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if (*layout == "") == (*rootfs == "") || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if *packages != "" {
		got := strings.Fields(*packages)
		slices.Sort(got)
		if want := slices.Sorted(slices.Values(ociimage.Packages)); !slices.Equal(got, want) {
			fail(fmt.Errorf("-packages: got %v, want test/ociimage's %v (keep the Containerfile's PACKAGES and spec.go in step)", got, want))
		}
	}
	tree, err := ociimage.Assemble(*bin)
	if err != nil {
		fail(err)
	}
	if *rootfs != "" {
		if err := tree.WriteDir(*rootfs); err != nil {
			fail(err)
		}
		return
	}
	d, err := tree.WriteLayout(*layout, *ref)
	if err != nil {
		fail(err)
	}
	fmt.Printf("mkimage: wrote %s:%s (manifest %s)\n", *layout, *ref, d)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mkimage:", err)
	os.Exit(1)
}
