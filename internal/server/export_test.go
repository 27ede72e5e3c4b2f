package server

// DetailOf is detailOf, for the tests of package server_test.
var DetailOf = detailOf
