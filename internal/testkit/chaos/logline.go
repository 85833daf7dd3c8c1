package chaos

import "encoding/json"

// JSONMsg is the msg field of a JSON log line (slog's JSON handler), "" if the line is not one.
func JSONMsg(line []byte) string {
	var rec struct{ Msg string }
	if json.Unmarshal(line, &rec) != nil {
		return ""
	}
	return rec.Msg
}
