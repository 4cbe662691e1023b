package app

import (
	"fmt"
	"time"
)

// pflagDuration is a flag value that rejects negative durations with a clear
// message (pflag's own accepts them).
type pflagDuration time.Duration

func (d *pflagDuration) String() string { return time.Duration(*d).String() }
func (d *pflagDuration) Type() string   { return "duration" }
func (d *pflagDuration) D() time.Duration {
	return time.Duration(*d)
}

func (d *pflagDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration (like 15s or 1m): %w", err)
	}
	if v <= 0 {
		return fmt.Errorf("must be positive, got %v", v)
	}
	*d = pflagDuration(v)
	return nil
}
