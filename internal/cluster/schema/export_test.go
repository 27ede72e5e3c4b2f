package schema

var LoadForTest = load

func (m Migration) Statements() []string { return m.statements }

const RecordSQL = recordSQL
