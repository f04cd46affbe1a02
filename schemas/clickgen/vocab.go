package clickgen

import "strconv"

// The vocabulary below is weighted to look like a retail site's traffic and
// sized so that a value averages about 333 bytes, the record size the
// performance targets in DESIGN.md are measured with.

// page says which part of the site an event's URL points into.
type page uint8

const (
	pageAny page = iota
	pageProduct
	pageSearch
	pageCheckout
	pageConfirmation
)

type eventType struct {
	name   string
	page   page
	weight int
}

// eventTypes in descending frequency; the weights are percentages.
var eventTypes = [...]eventType{
	{"page_view", pageAny, 42},
	{"click", pageProduct, 22},
	{"scroll", pageAny, 10},
	{"search", pageSearch, 9},
	{"add_to_cart", pageProduct, 7},
	{"remove_from_cart", pageProduct, 2},
	{"checkout", pageCheckout, 4},
	{"purchase", pageConfirmation, 2},
	{"login", pageAny, 2},
}

// eventTable maps a uniform draw to an event type index by weight.
var eventTable = func() []uint8 {
	var t []uint8
	for i, e := range eventTypes {
		for range e.weight {
			t = append(t, uint8(i))
		}
	}
	return t
}()

const site = "https://shop.example"

var categories = [...]string{
	"shoes", "jackets", "t-shirts", "jeans", "dresses", "accessories", "bags",
	"sportswear", "kids", "home", "kitchen", "electronics", "beauty", "sale",
}

var searchTerms = [...]string{
	"running+shoes", "rain+jacket", "black+jeans", "summer+dress", "backpack",
	"wireless+headphones", "coffee+maker", "yoga+mat", "gift+card", "socks",
	"winter+boots", "sunglasses", "linen+shirt", "water+bottle", "desk+lamp",
}

var staticPages = [...]string{
	"/", "/deals", "/new-arrivals", "/account", "/account/orders", "/cart",
	"/help/shipping", "/help/returns", "/stores",
}

var checkoutPages = [...]string{
	"/checkout", "/checkout/shipping", "/checkout/payment", "/checkout/review",
}

var externalReferrers = [...]string{
	"", // direct traffic
	"https://www.google.com/",
	"https://www.google.com/",
	"https://www.bing.com/",
	"https://duckduckgo.com/",
	"https://www.facebook.com/",
	"https://l.instagram.com/",
	"https://t.co/",
	"https://www.pinterest.com/",
	"https://news.example.net/best-deals-this-week",
	"https://mail.example.org/newsletter?utm_source=email&utm_campaign=weekly",
}

var userAgents = [...]string{
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
	"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
	"Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
	"Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:132.0) Gecko/20100101 Firefox/132.0",
	"ShopApp/7.4.2 (iPhone; iOS 18.1; Scale/3.00)",
	"ShopApp/7.4.1 (Android 14; Pixel 8)",
	"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
}

// uaTable weights userAgents: desktop Chrome and mobile Safari dominate, apps
// and crawlers are a minority.
var uaTable = func() []uint8 {
	weights := [len(userAgents)]int{18, 8, 16, 14, 5, 4, 4, 16, 11, 4}
	var t []uint8
	for i, w := range weights {
		for range w {
			t = append(t, uint8(i))
		}
	}
	return t
}()

// appendURL renders a URL in part p of the site.
func (g *Generator) appendURL(b []byte, p page) []byte {
	r := g.rng
	b = append(b, site...)
	if p == pageAny {
		switch n := r.IntN(10); {
		case n < 4:
			p = pageProduct
		case n < 6:
			b = append(b, "/c/"...)
			return append(b, categories[r.IntN(len(categories))]...)
		case n < 7:
			p = pageSearch
		default:
			return append(b, staticPages[r.IntN(len(staticPages))]...)
		}
	}
	switch p {
	case pageProduct:
		b = append(b, "/p/"...)
		return strconv.AppendInt(b, int64(10000+r.IntN(90000)), 10)
	case pageSearch:
		b = append(b, "/search?q="...)
		return append(b, searchTerms[r.IntN(len(searchTerms))]...)
	case pageCheckout:
		return append(b, checkoutPages[r.IntN(len(checkoutPages))]...)
	default: // pageConfirmation
		b = append(b, "/checkout/confirmation?order="...)
		return strconv.AppendInt(b, int64(r.IntN(1e9)), 10)
	}
}
