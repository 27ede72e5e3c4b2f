package server

// DetailOf is detailOf, for the tests of package server_test.
var DetailOf = detailOf

// ExhaustedStatus is exhaustedStatus, for the tests of package server_test.
var ExhaustedStatus = exhaustedStatus
