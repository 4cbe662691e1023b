//go:build plant_unconfirmed_expiry

package membership

func init() { plantedUnconfirmedExpiry = true }
