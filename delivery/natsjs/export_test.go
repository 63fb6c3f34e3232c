package natsjs

// SetBeforeCommit makes every batch run f before its commit; an error from
// f rolls the batch back, as a crash between the publish and the commit
// would.
func SetBeforeCommit(p *Publisher, f func() error) { p.beforeCommit = f }
