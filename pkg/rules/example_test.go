package rules_test

import (
	"fmt"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Example loads a rule file and resolves a request's descriptors to the
// limits that apply, with the counter each is counted in.
func Example() {
	const shop = `
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: path
        value: /checkout
        rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
`
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(shop)}, rules.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	web := rules.Entry{Key: "client", Value: "web"}
	var res rules.Resolution
	err = set.Resolve(&res, "shop", []rules.Descriptor{
		{Entries: []rules.Entry{web}},
		{Entries: []rules.Entry{web, {Key: "path", Value: "/checkout"}}},
		{Entries: []rules.Entry{{Key: "tenant", Value: "t1"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range res.Descriptors {
		if d.Rule == nil {
			fmt.Printf("%v: no rule\n", d.Entries)
			continue
		}
		for _, l := range d.Limits {
			fmt.Printf("%s: %s\n  counter %q\n", d.Rule.Path, l.Limit.Describe(), l.Key)
		}
	}

	// A bad file is refused whole, each problem at its file:line:column.
	_, err = rules.Parse(map[string][]byte{"bad.yaml": []byte(`domain: shop
descriptors:
  - key: client
    rate_limit: {unit: fortnight, requests_per_unit: 1}
`)}, rules.Options{})
	fmt.Println(err)
	// Output:
	// shop.client: 100 per minute (fixed_window)
	//   counter "r4:shop/6:client=0:|a=fixed_window|w=1m0s|v3:web"
	// shop.client.path_/checkout: 5 per second (token_bucket, burst 10)
	//   counter "r4:shop/6:client=0:/4:path=9:/checkout|a=token_bucket|w=1s|v3:web"
	// [{tenant t1}]: no rule
	// bad.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
}
