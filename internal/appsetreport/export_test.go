package appsetreport

// What the package's external tests use of its insides: the report writes, for the apiserver's cost of them.
var (
	NewRESTClient = newRESTClient
	WriteBody     = writeBody
	WriteRequest  = writeRequest
)
