// Reference renderings of Ollama chat templates, with Go's own text/template: reads
// tests/fixtures/ollama-templates/cases.json (templates, system prompts, conversations, tools)
// and prints, for each case, the prompt Ollama's template.Execute would produce
// (ollama/template/template.go, read at commit 0097ef5: `Parse` appends {{ .Response }} to a
// template naming neither .Messages nor .Response; `collate` joins consecutive turns of one role
// with a blank line and every system turn into .System; templates naming .Messages run once;
// others run once per exchange and a last time cut after the first .Response field by
// `deleteNode`; the chat handler puts the system layer first when the conversation has no
// system turn). The data types mirror ollama/api's (Message, ToolCall, Tool) with the String
// methods that print tools and tool-call arguments as JSON.
//
//	cd tools/ref/ollama_template_ref && go run . < ../../../tests/fixtures/ollama-templates/cases.json \
//	    > ../../../tests/fixtures/ollama-templates/reference.json
package main

import (
	"bytes"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"text/template"
	"text/template/parse"
)

type Args map[string]any

func (a Args) String() string { b, _ := json.Marshal(a); return string(b) }

type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments Args   `json:"arguments"`
}

type ToolCall struct {
	Function ToolCallFunction `json:"function"`
}

type Message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	ToolName  string     `json:"name,omitempty"`
}

type Prop struct {
	Type        string `json:"type"`
	Description string `json:"description"`
}

type Params struct {
	Type       string          `json:"type"`
	Required   []string        `json:"required"`
	Properties map[string]Prop `json:"properties"`
}

type ToolFunction struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  Params `json:"parameters"`
}

func (t *ToolFunction) String() string { b, _ := json.Marshal(t); return string(b) }

type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

func (t Tool) String() string { b, _ := json.Marshal(t); return string(b) }

type Case struct {
	Name     string    `json:"name"`
	Template string    `json:"template"`
	System   string    `json:"system"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools"`
}

var funcs = template.FuncMap{
	"json": func(v any) string { b, _ := json.Marshal(v); return string(b) },
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func identifiers(n parse.Node) []string {
	switch n := n.(type) {
	case *parse.ListNode:
		var names []string
		for _, c := range n.Nodes {
			names = append(names, identifiers(c)...)
		}
		return names
	case *parse.ActionNode:
		return identifiers(n.Pipe)
	case *parse.BranchNode:
		names := identifiers(n.Pipe)
		for _, l := range []*parse.ListNode{n.List, n.ElseList} {
			if l != nil {
				names = append(names, identifiers(l)...)
			}
		}
		return names
	case *parse.IfNode:
		return identifiers(&n.BranchNode)
	case *parse.RangeNode:
		return identifiers(&n.BranchNode)
	case *parse.WithNode:
		return identifiers(&n.BranchNode)
	case *parse.PipeNode:
		var names []string
		for _, c := range n.Cmds {
			for _, a := range c.Args {
				names = append(names, identifiers(a)...)
			}
		}
		return names
	case *parse.FieldNode:
		return n.Ident
	case *parse.VariableNode:
		return n.Ident
	}
	return nil
}

func vars(t *template.Template) []string {
	var out []string
	for _, n := range identifiers(t.Tree.Root) {
		out = append(out, strings.ToLower(n))
	}
	return out
}

// cutAfterResponse removes every node after the first .Response field (Ollama's deleteNode
// with its predicate), in the same walk order.
func cutAfterResponse(n parse.Node) parse.Node {
	cut := false
	fn := func(n parse.Node) bool {
		if f, ok := n.(*parse.FieldNode); ok && contains(f.Ident, "Response") {
			cut = true
			return false
		}
		return cut
	}
	var walk func(n parse.Node) parse.Node
	walk = func(n parse.Node) parse.Node {
		if fn(n) {
			return nil
		}
		switch t := n.(type) {
		case *parse.ListNode:
			var nodes []parse.Node
			for _, c := range t.Nodes {
				if n := walk(c); n != nil {
					nodes = append(nodes, n)
				}
			}
			t.Nodes = nodes
			return t
		case *parse.IfNode:
			t.BranchNode = *(walk(&t.BranchNode).(*parse.BranchNode))
		case *parse.WithNode:
			t.BranchNode = *(walk(&t.BranchNode).(*parse.BranchNode))
		case *parse.RangeNode:
			t.BranchNode = *(walk(&t.BranchNode).(*parse.BranchNode))
		case *parse.BranchNode:
			t.List = walk(t.List).(*parse.ListNode)
			if t.ElseList != nil {
				t.ElseList = walk(t.ElseList).(*parse.ListNode)
			}
		case *parse.ActionNode:
			n := walk(t.Pipe)
			if n == nil {
				return nil
			}
			t.Pipe = n.(*parse.PipeNode)
		case *parse.PipeNode:
			var commands []*parse.CommandNode
			for _, c := range t.Cmds {
				var args []parse.Node
				for _, a := range c.Args {
					if n := walk(a); n != nil {
						args = append(args, n)
					}
				}
				if len(args) == 0 {
					return nil
				}
				c.Args = args
				commands = append(commands, c)
			}
			if len(commands) == 0 {
				return nil
			}
			t.Cmds = commands
		}
		return n
	}
	return walk(n)
}

func collate(msgs []Message) (string, []*Message) {
	var system []string
	var collated []*Message
	for i := range msgs {
		if msgs[i].Role == "system" {
			system = append(system, msgs[i].Content)
		}
		if len(collated) > 0 && collated[len(collated)-1].Role == msgs[i].Role && msgs[i].Role != "tool" {
			collated[len(collated)-1].Content += "\n\n" + msgs[i].Content
		} else {
			collated = append(collated, &msgs[i])
		}
	}
	return strings.Join(system, "\n\n"), collated
}

func render(c Case) (string, error) {
	tmpl, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(c.Template)
	if err != nil {
		return "", err
	}
	vs := vars(tmpl)
	if !contains(vs, "messages") && !contains(vs, "response") {
		tmpl.Tree.Root.Nodes = append(tmpl.Tree.Root.Nodes, &parse.ActionNode{
			NodeType: parse.NodeAction,
			Pipe: &parse.PipeNode{NodeType: parse.NodePipe, Cmds: []*parse.CommandNode{{
				NodeType: parse.NodeCommand,
				Args:     []parse.Node{&parse.FieldNode{NodeType: parse.NodeField, Ident: []string{"Response"}}},
			}}},
		})
	}
	msgs := c.Messages
	if c.System != "" && (len(msgs) == 0 || msgs[0].Role != "system") {
		msgs = append([]Message{{Role: "system", Content: c.System}}, msgs...)
	}
	system, messages := collate(msgs)
	var b bytes.Buffer
	if contains(vs, "messages") {
		var tools any
		if c.Tools != nil {
			tools = c.Tools
		}
		err := tmpl.Execute(&b, map[string]any{
			"System": system, "Messages": messages, "Tools": tools,
			"Response": "", "Think": false, "IsThinkSet": false,
		})
		return b.String(), err
	}
	system = ""
	var prompt, response string
	for _, m := range messages {
		execute := func() error {
			err := tmpl.Execute(&b, map[string]any{
				"System": system, "Prompt": prompt, "Response": response,
				"Think": false, "IsThinkSet": false,
			})
			system, prompt, response = "", "", ""
			return err
		}
		switch m.Role {
		case "system":
			if prompt != "" || response != "" {
				if err := execute(); err != nil {
					return "", err
				}
			}
			system = m.Content
		case "user":
			if response != "" {
				if err := execute(); err != nil {
					return "", err
				}
			}
			prompt = m.Content
		case "assistant":
			response = m.Content
		}
	}
	nodes := cutAfterResponse(tmpl.Root.Copy())
	tree := parse.Tree{Root: nodes.(*parse.ListNode)}
	last := template.Must(template.New("").Funcs(funcs).AddParseTree("", &tree))
	err = last.Execute(&b, map[string]any{
		"System": system, "Prompt": prompt, "Response": response,
		"Think": false, "IsThinkSet": false,
	})
	return b.String(), err
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	out := map[string]any{"generator": "tools/ref/ollama_template_ref (Go " + runtime.Version() + " text/template)"}
	rendered := map[string]string{}
	for _, c := range cases {
		s, err := render(c)
		if err != nil {
			panic(c.Name + ": " + err.Error())
		}
		rendered[c.Name] = s
	}
	out["rendered"] = rendered
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
