package membership

import "time"

// Planted faults show that the chaos soak's checks bite: a build tagged
// plant_<name> (make chaos PLANT=<name> builds and runs one) breaks
// one safety rule of membership, and the soak must name the breach.
// Every other build leaves them false, and a replica built with one says
// so when it starts. informers/plants.go holds two more, in the owned
// cache.
var (
	// plantedUnboundedAuthority (plant_unbounded_authority): authority
	// does not end when renewals stop being accepted.
	plantedUnboundedAuthority bool
	// plantedUnconfirmedExpiry (plant_unconfirmed_expiry): a member whose
	// Lease the watch has not seen change for a lease duration is judged
	// expired without the fresh read that would show it renewed.
	plantedUnconfirmedExpiry bool
)

// plantedFaults names the planted faults of this build.
func plantedFaults() []string {
	var out []string
	if plantedUnboundedAuthority {
		out = append(out, "unbounded_authority")
	}
	if plantedUnconfirmedExpiry {
		out = append(out, "unconfirmed_expiry")
	}
	return out
}

// plantedDeadline is until, or, in a build with unbounded authority, an
// hour past now once the member has had authority at all.
func plantedDeadline(until, now time.Time) time.Time {
	if plantedUnboundedAuthority && !until.IsZero() {
		return now.Add(time.Hour)
	}
	return until
}
