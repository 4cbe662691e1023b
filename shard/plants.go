package shard

// plantedTableOutsideView is a planted fault for showing that the
// protocol simulation and the chaos soak catch a placement by weight whose
// table members do not agree on (membership/plants.go has the
// membership ones): the ViewID leaves the weight table out, so members
// that place by different tables (the keeper has switched, a member has
// not read it yet) agree on a view and both run a moved partition. A
// build tagged plant_table_outside_view sets it, and
// TestSimulationCatchesAPlantedTableBug sets it for its runs; every other
// build leaves it false.
var plantedTableOutsideView bool
