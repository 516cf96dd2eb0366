# Antler's document converter (spec B.2), run INSIDE the thread's sandbox: an untrusted
# document is parsed where it can do no harm. argv: source, output, pdf converter
# (auto | pymupdf4llm | markitdown). Writes the Markdown to the output and prints one
# status line: ANTLER_CONVERTED <converter>, or ANTLER_CONVERT_FAILED <reason>.
import sys

MIN_CHARS_PER_PAGE = 50


def fail(reason):
    print("ANTLER_CONVERT_FAILED " + " ".join(str(reason).split())[:300])
    sys.exit(0)


# Only the converter of the document's own type: MarkItDown's other converters (plain
# text above all) would turn a file that is not what its name says into garbage.
MARKITDOWN_CONVERTERS = {
    ".pdf": "PdfConverter",
    ".docx": "DocxConverter",
    ".pptx": "PptxConverter",
    ".xlsx": "XlsxConverter",
    ".xls": "XlsConverter",
}


def with_markitdown(path):
    try:
        from markitdown import MarkItDown
        import markitdown.converters as converters
    except ImportError:
        fail("markitdown is not installed in the sandbox")
    extension = "." + path.rsplit(".", 1)[-1].lower()
    name = MARKITDOWN_CONVERTERS.get(extension)
    if name is None:
        fail("no converter reads " + extension + " files (save it as " + extension + "x)")
    md = MarkItDown(enable_builtins=False)
    md.register_converter(getattr(converters, name)())
    return md.convert(path).text_content


def with_pymupdf4llm(path):
    try:
        import pymupdf4llm
    except ImportError:
        return None
    try:
        return pymupdf4llm.to_markdown(path)
    except Exception:
        return None


def too_sparse(text, path):
    chars = len(text.strip())
    try:
        import pymupdf

        with pymupdf.open(path) as doc:
            pages = len(doc)
    except Exception:
        pages = None
    if pages:
        return chars / pages < MIN_CHARS_PER_PAGE
    return chars < 200


def main():
    source, output, pdf_converter = sys.argv[1], sys.argv[2], sys.argv[3]
    used = "markitdown"
    text = None
    if source.lower().endswith(".pdf") and pdf_converter != "markitdown":
        text = with_pymupdf4llm(source)
        if text is not None:
            used = "pymupdf4llm"
            if pdf_converter != "pymupdf4llm" and too_sparse(text, source):
                text = None
        elif pdf_converter == "pymupdf4llm":
            fail("pymupdf4llm is not installed in the sandbox, or could not read the file")
    if text is None:
        used = "markitdown"
        try:
            text = with_markitdown(source)
        except SystemExit:
            raise
        except Exception as e:
            fail(type(e).__name__ + ": " + str(e))
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    print("ANTLER_CONVERTED " + used)


main()
