//go:build !race

package testutil

// RaceEnabled reports a -race build, whose memory figures mean nothing.
const RaceEnabled = false
