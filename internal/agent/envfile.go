package agent

import (
	"fmt"
	"strings"
)

// ParseEnvFile reads an environment file as a POSIX shell would source it,
// for the subset that assignments need: KEY=VALUE lines, an optional
// "export " in front, comments and blank lines, and values made of bare
// characters, backslash escapes, 'single-quoted' and "double-quoted" parts
// (which may span lines). Errors give the line and never the text: values
// may be credentials. Anything that would make a shell run or expand
// something ($, `, ;, |, &, <, >, parentheses) is an error, so a file that
// parses here means the same to sh. Later assignments override earlier ones.
func ParseEnvFile(text string) (map[string]string, error) {
	p := &envParser{s: text, line: 1}
	out := map[string]string{}
	for {
		p.skipBlank()
		if p.eof() {
			return out, nil
		}
		key, value, err := p.assignment()
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", p.line, err)
		}
		out[key] = value
	}
}

type envParser struct {
	s    string
	i    int
	line int
}

func (p *envParser) eof() bool  { return p.i >= len(p.s) }
func (p *envParser) peek() byte { return p.s[p.i] }

func (p *envParser) advance() byte {
	c := p.s[p.i]
	p.i++
	if c == '\n' {
		p.line++
	}
	return c
}

// skipBlank skips whitespace, newlines and comment lines.
func (p *envParser) skipBlank() {
	for !p.eof() {
		switch c := p.peek(); {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			p.advance()
		case c == '#':
			for !p.eof() && p.peek() != '\n' {
				p.advance()
			}
		default:
			return
		}
	}
}

func isNameByte(c byte, first bool) bool {
	return c == '_' || ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') || (!first && '0' <= c && c <= '9')
}

func (p *envParser) name() string {
	start := p.i
	for !p.eof() && isNameByte(p.peek(), p.i == start) {
		p.advance()
	}
	return p.s[start:p.i]
}

func (p *envParser) assignment() (string, string, error) {
	key := p.name()
	if key == "export" && !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
			p.advance()
		}
		key = p.name()
	}
	if key == "" {
		return "", "", fmt.Errorf("expected NAME=VALUE")
	}
	if p.eof() || p.peek() != '=' {
		return "", "", fmt.Errorf("expected = after %s", key)
	}
	p.advance()
	value, err := p.value()
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", key, err)
	}
	// Only blanks and a comment may follow a value on its line.
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t' || p.peek() == '\r') {
		p.advance()
	}
	if !p.eof() && p.peek() != '\n' && p.peek() != '#' {
		return "", "", fmt.Errorf("%s: unexpected text after the value (quote values with spaces)", key)
	}
	return key, value, nil
}

// value reads one shell word.
func (p *envParser) value() (string, error) {
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			return b.String(), nil
		case c == '\'':
			p.advance()
			if err := p.singleQuoted(&b); err != nil {
				return "", err
			}
		case c == '"':
			p.advance()
			if err := p.doubleQuoted(&b); err != nil {
				return "", err
			}
		case c == '\\':
			p.advance()
			if p.eof() {
				return "", fmt.Errorf("backslash at the end of the file")
			}
			if e := p.advance(); e != '\n' { // backslash-newline joins lines
				b.WriteByte(e)
			}
		case strings.IndexByte("$`;|&<>()", c) >= 0:
			return "", fmt.Errorf("unquoted %q: expansions and commands are not supported", c)
		default:
			b.WriteByte(p.advance())
		}
	}
	return b.String(), nil
}

func (p *envParser) singleQuoted(b *strings.Builder) error {
	for !p.eof() {
		c := p.advance()
		if c == '\'' {
			return nil
		}
		b.WriteByte(c)
	}
	return fmt.Errorf("unterminated single quote")
}

func (p *envParser) doubleQuoted(b *strings.Builder) error {
	for !p.eof() {
		c := p.advance()
		switch c {
		case '"':
			return nil
		case '$', '`':
			return fmt.Errorf("%q inside double quotes: expansions are not supported", c)
		case '\\':
			if p.eof() {
				return fmt.Errorf("unterminated double quote")
			}
			e := p.advance()
			switch e {
			case '$', '`', '"', '\\':
				b.WriteByte(e)
			case '\n':
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return fmt.Errorf("unterminated double quote")
}

// ShellQuote quotes s as one word for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
