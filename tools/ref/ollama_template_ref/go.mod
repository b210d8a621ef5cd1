module oxinfer/tools/ref/ollama_template_ref

go 1.19
