package main

// allPages calls list for every page of a List call, from the first page
// to the one with no next_page_token, and merges each later page into the
// first response.
func allPages[R interface{ GetNextPageToken() string }](list func(pageToken string) (R, error), merge func(into, page R)) (R, error) {
	first, err := list("")
	if err != nil {
		return first, err
	}
	for tok := first.GetNextPageToken(); tok != ""; {
		page, err := list(tok)
		if err != nil {
			return first, err
		}
		merge(first, page)
		tok = page.GetNextPageToken()
	}
	return first, nil
}
