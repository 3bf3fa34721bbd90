package appsetreport

// What the package's external tests use of its insides: the report writes, for the apiserver's cost of them,
// and the count of evaluations.
var (
	Evaluations   = evaluations
	NewRESTClient = newRESTClient
	WriteBody     = writeBody
	WriteRequest  = writeRequest
)
