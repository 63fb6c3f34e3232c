// Package reliability is paygate's fault-injection harness: it builds and
// runs the real `paygate serve` binary, kills it with SIGKILL at random
// points, runs several instances on one database, restarts a private
// PostgreSQL cluster and drops its connections, all while a provider-like
// sender delivers signed simulator events (several copies, shuffled,
// retrying every request that got no 2xx). Afterwards a total-queue checker
// (after Jepsen's: attempted, acknowledged, lost, duplicated, recovered)
// compares what the gateway acknowledged and what its books say with a
// model: the same events applied in creation order to a fresh world, and the
// ledger refs the simulator's own history implies.
//
// Everything it starts is stopped at test cleanup: gateway processes are
// killed (and die with the test binary, by Pdeathsig), private clusters are
// stopped with pg_ctl, and clusters left behind by a test binary that was
// killed are swept by SweepClusters. Only loopback addresses are used.
//
// It must never be imported by production code.
package reliability
