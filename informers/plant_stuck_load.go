//go:build plant_stuck_load

package informers

func init() { plantedStuckLoad = true }
