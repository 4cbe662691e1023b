//go:build plant_table_outside_view

package shard

func init() { plantedTableOutsideView = true }
