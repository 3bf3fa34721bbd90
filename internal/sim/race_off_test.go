//go:build !race

package sim

// raceEnabled reports a -race build, whose memory figures mean nothing.
const raceEnabled = false
