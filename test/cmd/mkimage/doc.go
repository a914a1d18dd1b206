// Command mkimage assembles airlock's container image offline (package
// test/ociimage): `make image` writes an OCI image layout from bin/ and the
// host's Debian packages, and the Containerfile's assembly stage writes the
// same files as a root filesystem directory.
//
// Entry point: main.
//
// test/cmd/mkimage must never import: any other airlock package but test/ociimage.
package main
