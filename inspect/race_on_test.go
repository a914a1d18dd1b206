//go:build race

package inspect_test

// raceOn: the race detector makes a scan ~20x slower, so tests that measure
// rates over thousands of real files measure a sample under it.
const raceOn = true
