package shield

// SetAfterFilterWalk makes RefreshFilter call f between its walk of the
// table and its swap (tests of package shield_test).
func SetAfterFilterWalk(s *Shield, f func()) { s.afterFilterWalk = f }
