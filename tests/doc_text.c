/* doc_text: see doc_text.h. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc_text.h"

#ifndef OBJFS_SRCDIR
#define OBJFS_SRCDIR "."
#endif

static void push(struct doc_list *l, const char *s, size_t n)
{
	char **v = realloc(l->v, (l->n + 1) * sizeof(*v));

	if (!v)
		abort();
	l->v = v;
	l->v[l->n] = strndup(s, n);
	if (!l->v[l->n])
		abort();
	l->n++;
}

void doc_list_add(struct doc_list *l, const char *s)
{
	push(l, s, strlen(s));
}

void doc_list_free(struct doc_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

int doc_list_has(const struct doc_list *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0)
			return 1;
	return 0;
}

char *doc_read(const char *rel)
{
	const char *dir = getenv("srcdir");
	char path[4096], *buf = NULL;
	size_t n = 0, cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : OBJFS_SRCDIR, rel);
	f = fopen(path, "r");
	if (!f) {
		snprintf(path, sizeof(path), "%s/%s", OBJFS_SRCDIR, rel);
		f = fopen(path, "r");
	}
	if (!f)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 65536;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		size_t k = fread(buf + n, 1, cap - n - 1, f);

		if (!k)
			break;
		n += k;
	}
	fclose(f);
	if (!buf)
		buf = calloc(1, 1);
	buf[n] = '\0';
	return buf;
}

char *doc_man_section(const char *man, const char *name)
{
	char head[128];
	const char *p, *end;

	snprintf(head, sizeof(head), "\n.SH %s\n", name);
	p = strstr(man, head);
	if (!p)
		return NULL;
	p += strlen(head);
	end = strstr(p, "\n.SH ");
	return strndup(p, end ? (size_t)(end - p + 1) : strlen(p));
}

void doc_man_heads(const char *section, struct doc_list *out)
{
	for (const char *p = section; (p = strstr(p, ".TP\n")); p += 4)
		if (p == section || p[-1] == '\n')
			push(out, p + 4, strcspn(p + 4, "\n"));
}

/* Adds the names in the bold text @s (@n bytes) to @out. */
static void names_of(const char *s, size_t n, struct doc_list *out)
{
	char text[1024];
	size_t k = 0;

	/* groff escapes: \- is '-', \fX font changes and \& are nothing here */
	for (size_t i = 0; i < n && k + 1 < sizeof(text); i++) {
		if (s[i] == '\\' && i + 1 < n && s[i + 1] == '-') {
			text[k++] = '-';
			i++;
		} else if (s[i] == '\\' && i + 1 < n && s[i + 1] == '&') {
			i++;
		} else {
			text[k++] = s[i];
		}
	}
	text[k] = '\0';
	for (char *save = NULL, *t = strtok_r(text, " \t,|/\"()[]", &save); t;
	     t = strtok_r(NULL, " \t,|/\"()[]", &save)) {
		size_t len = strcspn(t, "=");

		if (!len || t[0] == '-' || t[0] == '.' || strchr(t, '*'))
			continue;
		push(out, t, len);
	}
}

/* The bold arguments of one request line (.B, .BI, .BR, .IB, .RB). */
static void request_names(const char *line, size_t n, struct doc_list *out)
{
	char args[1024];
	int bold_first, idx = 0;
	size_t k = 0;
	const char *p;

	if (!strncmp(line, ".B ", 3)) {
		names_of(line + 3, n - 3, out);
		return;
	}
	if (strncmp(line, ".BI ", 4) && strncmp(line, ".BR ", 4) && strncmp(line, ".IB ", 4) &&
	    strncmp(line, ".RB ", 4))
		return;
	bold_first = line[1] == 'B';
	/* arguments: words, or "quoted strings" */
	for (p = line + 4; p < line + n;) {
		const char *a;
		size_t al;

		while (p < line + n && *p == ' ')
			p++;
		if (p >= line + n)
			break;
		if (*p == '"') {
			a = ++p;
			while (p < line + n && *p != '"')
				p++;
			al = (size_t)(p - a);
			p++;
		} else {
			a = p;
			while (p < line + n && *p != ' ')
				p++;
			al = (size_t)(p - a);
		}
		if ((idx++ % 2 == 0) == bold_first && k + al + 2 < sizeof(args)) {
			memcpy(args + k, a, al);
			k += al;
			args[k++] = ' ';
		}
	}
	names_of(args, k, out);
}

void doc_bold_names(const char *text, struct doc_list *out)
{
	for (const char *line = text; line && *line;) {
		size_t n = strcspn(line, "\n");

		if (line[0] == '.')
			request_names(line, n, out);
		/* inline \fB...\fR (or up to the next font change) */
		for (const char *b = line; (b = strstr(b, "\\fB")) && b < line + n;) {
			const char *e = strstr(b + 3, "\\f");

			if (!e || e > line + n)
				e = line + n;
			names_of(b + 3, (size_t)(e - b - 3), out);
			b = e;
		}
		line += n;
		if (*line)
			line++;
	}
}

void doc_md_rows(const char *md, const char *header, struct doc_list *out)
{
	for (const char *p = md; (p = strstr(p, header));) {
		if (p != md && p[-1] != '\n') {
			p++;
			continue;
		}
		p = strchr(p, '\n'); /* the header */
		if (p)
			p = strchr(p + 1, '\n'); /* the |---| line */
		while (p && p[1] == '|') {
			size_t n = strcspn(p + 1, "\n");

			push(out, p + 1, n);
			p += 1 + n;
		}
		if (!p)
			break;
	}
}

void doc_md_cell(const char *row, int i, char *buf, size_t cap)
{
	const char *p = row;
	size_t k = 0;

	buf[0] = '\0';
	if (*p == '|')
		p++;
	for (int c = 0; *p && c < i; p++) {
		if (*p == '\\' && p[1] == '|')
			p++;
		else if (*p == '|')
			c++;
	}
	while (*p == ' ')
		p++;
	for (; *p && *p != '|' && k + 1 < cap; p++) {
		if (*p == '\\' && p[1] == '|')
			p++;
		buf[k++] = *p;
	}
	while (k && buf[k - 1] == ' ')
		k--;
	buf[k] = '\0';
}

void doc_md_names(const char *cell, struct doc_list *out)
{
	for (const char *p = strchr(cell, '`'); p; p = strchr(p + 1, '`')) {
		const char *e = strchr(p + 1, '`');
		size_t len;

		if (!e)
			break;
		len = strcspn(p + 1, "=`");
		if (len && p[1] != '-' && !memchr(p + 1, '*', (size_t)(e - p - 1)) &&
		    strncmp(p + 1, "...", 3))
			push(out, p + 1, len);
		p = e;
	}
}
