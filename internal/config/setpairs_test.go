package config_test

import (
	"strings"
	"testing"

	"github.com/wowd/wowd/internal/config"
)

// TestSetNeverShowsAPartOfAValue: errors name a --set pair by its key,
// never its value. A comma splits an argument into pairs, so a secret
// holding one (--set wow.kafka.sasl.password=hunter2,SECRETTAIL) leaves a
// pair without = that is the rest of the secret: it was printed as the
// name of the pair ("--set SECRETTAIL: want key=value"), and so was the
// part before an = in it (base64's padding: a,b==). A pair after a comma
// that does not start with a key of wowd's (wow.) is named by where it is,
// with the key before it and how to keep a comma in a value; escaped, the
// comma is the value's.
func TestSetNeverShowsAPartOfAValue(t *testing.T) {
	_, _, err := parseSources(t, layeredYAML, config.Sources{Set: []string{
		"wow.kafka.sasl.mechanism=plain",
		"wow.kafka.sasl.password=hunter2,SECRETTAIL,wow.kafka.sasl.username=u",
		"=SECRET2",
		"SECRET3",
		"wow.log.level=debug,wow.kafka.sasl.password=aGVsbG8,SECRET4==",
		"wow.kafka.sasl.password=x,SECRET5=,y",
	}})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, s := range []string{"hunter2", "SECRETTAIL", "SECRET2", "SECRET3", "aGVsbG8", "SECRET4", "SECRET5"} {
		if strings.Contains(msg, s) {
			t.Errorf("the error shows %s, a part of a --set value:\n%s", s, msg)
		}
	}
	wantErrors(t, err,
		`--set: argument 2, pair 2 (after wow.kafka.sasl.password): want key=value; a comma that is part of a value is written \,`,
		`--set: argument 3: want key=value`,
		`--set: argument 4: want key=value`,
		`--set: argument 5, pair 3 (after wow.kafka.sasl.password): keys start with wow.; a comma that is part of a value is written \,`,
		`--set: argument 6, pair 2 (after wow.kafka.sasl.password): keys start with wow.; a comma that is part of a value is written \,`,
		`--set: argument 6, pair 3: want key=value; a comma that is part of a value is written \,`,
	)

	c, _, err := parseSources(t, layeredYAML, config.Sources{Set: []string{
		`wow.kafka.sasl.mechanism=plain,wow.kafka.sasl.username=u,wow.kafka.sasl.password=hunter2\,SECRETTAIL`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Kafka.SASL.Password != "hunter2,SECRETTAIL" {
		t.Errorf("escaped comma: password %q", c.Kafka.SASL.Password)
	}
}
