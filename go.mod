module github.com/gobn/gobn

go 1.26

require (
	github.com/galeone/tensorflow/tensorflow/go v0.0.0-20221023090153-6b7fa0680c3e
	github.com/galeone/tfgo v0.0.0-20230715013254-16113111dc99
	github.com/sbinet/npyio v0.6.0
	github.com/stretchr/testify v1.12.1
	google.golang.org/protobuf v1.28.1
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	gonum.org/v1/gonum v0.9.3 // indirect
)
