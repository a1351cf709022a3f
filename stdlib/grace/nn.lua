-- grace.nn: neural network modules on top of the grace tensor DSL.
return {}
