//go:build !race

package inspect_test

const raceOn = false
